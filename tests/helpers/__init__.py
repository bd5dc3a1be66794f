"""Test helpers shared across the package folders: IAM evaluation, an S3 emulator with Pod Identity, spawned gloo
sweeps, and policy-preview shapes. Imported as ``tests.helpers.<module>``."""
