"""Repository tooling (not part of the multiwriter package)."""
