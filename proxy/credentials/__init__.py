"""Credentials the proxy fetches and mints (docs/configuration.md#credentials):
one module per source or minter behind `base.Source`, listed in `table.KINDS`; the
`credentials:` section and `credential:` bindings in `section`; the cache in `cache`."""
