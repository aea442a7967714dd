"""What a compile is: a kernel's identity, how it travels to a worker, and the request."""
