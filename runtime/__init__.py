"""The launcher layer: the commands, and what starts and runs mitmproxy with the addons.

Imports run one way: runtime -> addons -> proxy (tests/proxy/test_layers.py).
"""
