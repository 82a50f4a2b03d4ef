"""The Celery runtime of the jobs: the app, the task, the worker and what runs beside it (reconciler, watchdog,
presence, the embedded Redis), and publishing an item."""
