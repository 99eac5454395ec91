"""How deep to draft: the policy interface and the fixed depth (``base``), auto's adaptive
policy (``adaptive``) with its robust round costs (``costs``), and where what auto learned
is kept per model and machine (``store``)."""
