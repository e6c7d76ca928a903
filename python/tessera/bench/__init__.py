"""Benchmarks of tessera against its peers through the public paths (`python -m tessera.bench`)."""
