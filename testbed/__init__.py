"""The test bed: network namespaces, test hosts and upstreams, a test CA, process helpers.

Shared by the tests (`tests/`), `make demo` (`demo/`) and `make bench` (`bench/`), so it
is not part of the tests package; nothing here is installed or shipped in the image.
"""
