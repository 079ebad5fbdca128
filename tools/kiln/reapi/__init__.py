"""kiln on the Remote Execution API (REAPI v2, gRPC): `grpc://` and `grpcs://` backends.

    channel.py    ChannelSpec: the address, TLS files and headers of a server
    store.py      GrpcStore: the RemoteStore of --remote_cache=grpc(s):// (action
                  cache, CAS, ByteStream)

The protos are buildgrid-common's (REAPI v2, ByteStream, Remote Workers API).
kiln.remote.stores opens the store; nothing here is imported by a build
that names no grpc:// address.
"""
