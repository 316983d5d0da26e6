"""nn -> nest: convert-nn-to-nest (`convert`) and lower-batch-norm (`batch_norm`)."""
