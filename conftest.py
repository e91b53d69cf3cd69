"""Root conftest: the project's own tests use pytester to run pytest in subprocess-free sandboxes."""
pytest_plugins = ["pytester"]
