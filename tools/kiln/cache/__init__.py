"""The local cache: content-addressed blobs, action results, file digests, and their GC."""

from kiln.cache.action_cache import ActionCache, ActionResult, OutputFile
from kiln.cache.cas import ContentStore
from kiln.cache.digest import DIGEST_FUNCTIONS, Digest, digest_bytes, digest_file, new_hasher
from kiln.cache.digest_cache import FileDigestCache
from kiln.cache.gc import GcReport, collect

__all__ = [
    "DIGEST_FUNCTIONS",
    "ActionCache",
    "ActionResult",
    "ContentStore",
    "Digest",
    "FileDigestCache",
    "GcReport",
    "OutputFile",
    "collect",
    "digest_bytes",
    "digest_file",
    "new_hasher",
]
