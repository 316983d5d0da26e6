"""nasir.frontend."""
