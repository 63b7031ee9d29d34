"""The served-model backend (``openai:URL``): an OpenAI-compatible server over HTTP.

``openai_model`` identifies the server and is the scheme's factory, ``openai_http`` the
stdlib client; ``openai_adapter.OpenAIAdapter`` is the one class that declares the request
kinds this backend serves (``capabilities`` from what the server answered, dispatched in
``run_batch``).
"""
