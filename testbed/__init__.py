"""Local stand-ins for the services the tests, the chaos run and the benchmarks talk to (moto's
S3 server). Not part of the multiwriter package; below both ``benchmarks`` and ``tools``, which
may import it, and it imports neither (the `repository` contract in pyproject.toml)."""
