"""nasir.runtime."""
