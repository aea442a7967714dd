"""What a compile is: the request (request), a kernel's identity and how it travels to a worker
(kernel_spec), the data forms of the values it depends on (values), and how a worker gets the
kernel back (rebuild)."""
