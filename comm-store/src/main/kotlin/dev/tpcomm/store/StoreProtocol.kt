package dev.tpcomm.store

/**
 * PyTorch's TCPStore wire protocol, as its source defines it (pytorch/pytorch,
 * `torch/csrc/distributed/c10d/TCPStoreBackend.hpp`: `QueryType`, `CheckResponseType`,
 * `WaitResponseType`, `validationMagicNumber`; `store/TCPStoreLibUvBackend.cpp`: the limits
 * `MAX_KEY_COUNT`, `MAX_STRING_LEN`, `MAX_PAYLOAD_LEN`, and `UvClient::processBuf` with its
 * `parse_*_command` functions; `TCPStore.cpp`: the client's `SendBuffer` and its `keyPrefix_`).
 *
 * A request is one query byte and its arguments, with no overall length. Integers are little-endian
 * (the C++ code copies host-order `uint64_t`/`int64_t`/`uint32_t` on x86-64 and ARM64); keys and
 * values are a u64 length and the raw bytes (`ChunkedStream::read_key`/`read_payload` on the
 * server, `SendBuffer::appendString`/`appendBytes` on the client).
 */
internal object StoreProtocol {
    const val VALIDATE: Int = 0
    const val SET: Int = 1
    const val COMPARE_SET: Int = 2
    const val GET: Int = 3
    const val ADD: Int = 4
    const val CHECK: Int = 5
    const val WAIT: Int = 6
    const val GETNUMKEYS: Int = 7
    const val DELETE_KEY: Int = 8
    const val APPEND: Int = 9
    const val MULTI_GET: Int = 10
    const val MULTI_SET: Int = 11
    const val CANCEL_WAIT: Int = 12
    const val PING: Int = 13
    const val QUEUE_PUSH: Int = 14
    const val QUEUE_POP: Int = 15
    const val QUEUE_LEN: Int = 16
    const val LIST_KEYS: Int = 17
    const val BARRIER: Int = 18

    /** `CheckResponseType::READY` / `NOT_READY`. */
    const val CHECK_READY: Int = 0
    const val CHECK_NOT_READY: Int = 1

    /** `WaitResponseType::STOP_WAITING` / `WAIT_CANCELED`. */
    const val STOP_WAITING: Int = 0
    const val WAIT_CANCELED: Int = 1

    /** `validationMagicNumber` (TCPStoreBackend.hpp): the first request is VALIDATE and this u32. */
    const val VALIDATION_MAGIC: Int = 0x3C85F7CE

    /** `MAX_STRING_LEN` (TCPStoreLibUvBackend.cpp, checked in `ChunkedStream::read_key`): 8 KiB. */
    const val MAX_KEY_BYTES: Int = 8 * 1024

    /** `MAX_PAYLOAD_LEN` (checked in `ChunkedStream::read_payload`): 8 MiB. */
    const val MAX_VALUE_BYTES: Int = 8 * 1024 * 1024

    /** `MAX_KEY_COUNT` (checked by CHECK, WAIT, MULTI_GET and MULTI_SET): 128 Ki keys. */
    const val MAX_KEY_COUNT: Int = 128 * 1024

    /** `TCPStore::keyPrefix_`: PyTorch's client puts `/` before every user key. */
    const val KEY_PREFIX: String = "/"

    /** `TCPStore::initKey_`: the worker counter, the one key sent without [KEY_PREFIX]. */
    const val INIT_KEY: String = "init/"

    /** `TCPStoreOptions::kDefaultPort` (TCPStore.hpp): 29500, also torchrun's default `MASTER_PORT`. */
    const val DEFAULT_PORT: Int = 29500
}
