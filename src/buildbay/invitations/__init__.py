"""Invitations: bringing people into a project by e-mail, whether or not they have an account."""
