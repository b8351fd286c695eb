"""The local model stack: a llama-server built once per machine and GGUF models assembled from PyPI parts."""
