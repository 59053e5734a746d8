package dev.tpcomm.java

/**
 * An object collective of [JavaCommunicator] (`allGatherObject`, `broadcastObject`) could not
 * encode or decode a value: the user's [ObjectCodec] (or the kotlinx.serialization serializer
 * behind a `Class`-based overload) threw, or returned null from `encode`.
 *
 * Thrown on **every** rank of the collective, not only on the rank whose value failed: the failure
 * travels with the collective's own messages, so no rank waits for a value that will never come.
 * The collective itself completed, so the communicator stays usable. [message] names the
 * operation, the ranks in [ranks] and what the codec said; on the rank where the codec threw,
 * [cause] is the codec's exception.
 */
public class ObjectCodecException internal constructor(
    message: String,
    /** The ranks whose values could not be encoded (or, when decoding failed, whose bytes could not be decoded), ascending. */
    public val ranks: List<Int>,
    cause: Throwable?,
) : RuntimeException(message, cause)
