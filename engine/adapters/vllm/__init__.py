"""The in-process vLLM backend (``vllm:DIR``, ``vllm:ADAPTER_DIR``).

``vllm_model`` checks and identifies a checkpoint before any load, ``vllm_engine`` keeps
the process's one engine, ``vllm_lora`` serves a LoRA adapter on its base's engine and is
the scheme's factory; ``vllm_adapter.VLLMAdapter`` is the one class that declares the
request kinds this backend serves (``CAPABILITIES``, dispatched in ``run_batch``).
Importing this package does not import vllm.
"""
