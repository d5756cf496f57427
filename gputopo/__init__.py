"""gputopo: multi-GPU topology, strategy and launch advice."""
__version__ = "0.1.0"
