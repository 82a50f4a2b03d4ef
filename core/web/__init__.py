"""The HTTP edge shared by the gateway and the jobs routes: one error shape, request context, auth."""
