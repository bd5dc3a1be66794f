"""Checkpoint storage: the S3 bucket and the rules the stack config and the bucket both check."""
