"""TensorRT's rules: trt_engine, trt_windows_engine and the TensorRT toolchain they
declare; the loaders' templates are in templates/. The actions they run are
kiln.actions.tensorrt."""
