"""The process engine: a coordinator process, worker processes, the shared-memory frames
between them, and starting and releasing all of it on every way out."""
