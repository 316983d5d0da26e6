"""nasir.transforms."""
