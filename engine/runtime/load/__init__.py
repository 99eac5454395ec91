"""Loading a model safely: checks first, anything that could abort in a child process.

``loader`` resolves the MTP source and builds the session; ``loadcheck`` (child:
``loadcheck_child``) proves a (files, build, settings) combination decodes before this
process does; ``filecheck`` (child: ``filecheck_child``) asks llama.cpp about a file
without risking the app; ``buildcheck`` (child: ``buildcheck_child``) proves a backend
build runs on its device; ``rpcdevices`` registers RPC servers and places layers on them.
"""
