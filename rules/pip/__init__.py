"""Third-party Python packages: python_requirements (the workspace's lock) and
python_requirement (a locked package, made by loading as @pip//<name>)."""
