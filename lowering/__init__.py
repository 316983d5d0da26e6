"""nasir.lowering."""
