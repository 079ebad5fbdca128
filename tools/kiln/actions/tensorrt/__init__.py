"""TensorRT's actions: `python -m kiln.actions.tensorrt.<name> spec.json`.

One compile library (compiler.py) serves TrtEngine (engine.py), TrtCompile
(compile_structure.py) and AotiPackage's Torch-TensorRT route (aoti_package.py,
aoti_backend.py), under one settings policy (settings.py).
"""
