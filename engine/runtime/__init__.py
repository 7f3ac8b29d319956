"""The runtime: what happens once code exists (building, launching, timing)."""
