"""sandbox-egress: the egress proxy (`egress-proxy`) and the hook runner (`hookrunner`).

One import package, so that the installed distribution adds no generic top-level names
(`proxy`, `addons`, `common`): its subpackages are the repository's folders
(docs/decisions.md D140).
"""
