"""Loading a model safely: checks first, anything that could abort in a child process.

``loader`` resolves the MTP source and builds the session; ``loadcheck`` (child:
``loadcheck_child``) proves a (files, build, settings) combination decodes before this
process does; ``filecheck`` (child: ``filecheck_child``) asks llama.cpp about a file
without risking the app; ``buildcheck`` (child: ``buildcheck_child``) proves a backend
build runs on its device; ``rpcdevices`` registers RPC servers and lists their devices,
``placement`` places a model's layers on them, and ``rpcsurvey`` (child: ``rpcsurvey_child``)
lists them without risking the app.
"""
