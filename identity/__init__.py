"""Who may do what, proven: public keys, principals and roles (issue 23)."""
