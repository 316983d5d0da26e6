"""nasir.dialects."""
