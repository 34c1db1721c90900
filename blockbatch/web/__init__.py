"""The review web app (the CLI's ``serve``): ``app.create_app`` builds it, ``security`` keeps
it safe (loopback unless a token is set, sign-in, CSRF, escaped output)."""
