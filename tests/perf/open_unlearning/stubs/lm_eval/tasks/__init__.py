class TaskManager:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("lm_eval stub: not installed in this benchmark venv")
