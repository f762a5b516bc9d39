"""baige-plan: plan parallel training of large models on big and mixed accelerator clusters."""

__version__ = "0.1.0"
