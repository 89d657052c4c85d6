"""Tests of adapters and LoRA (keras_ctx/peft.py)."""
