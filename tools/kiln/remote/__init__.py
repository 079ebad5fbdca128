"""Remote backends as providers: opened by the scheme of their address, from one record.

    RemoteOptions (options.py)         the --remote_* flags a backend reads; frozen and
                                       picklable: it travels to nodes in each task, so a
                                       node's store has the driver's headers, timeout and
                                       minimum rate
    open_store(options)  (stores.py)   --remote_cache    http://, https:// -> kiln.cache.remote
        -> RemoteStore                 (the protocol: kiln/cache/remote_store.py)
    open_executor(options, store)      --remote_executor ray://            -> kiln.remote_exec
        -> RemoteExecutor              (backends.py; the protocol: executor.py): a spawner,
                                       the platform GPU toolchains resolve on, describe()

The store is opened once per process: the driver's remote-cache lookups and
uploads and its remote executor share it; a node keeps one per options record.
A second backend (the Remote Execution API over gRPC: `grpc://`, `grpcs://`) is
a package of its own plus one arm in each factory it serves.

open_store is in this layer, below kiln.remote_exec, since nodes open stores;
open_executor (backends.py) is a layer above the executors it names.
"""
