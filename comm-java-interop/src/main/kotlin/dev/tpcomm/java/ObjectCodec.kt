package dev.tpcomm.java

/**
 * Turns values of type [T] into bytes and back, for the object collectives of [JavaCommunicator]
 * (`allGatherObject`, `broadcastObject`). Implement it with whatever serializer you already use
 * (Jackson, Protocol Buffers, Java serialization, a hand-written format), so plain Java records and
 * POJOs travel without kotlinx.serialization:
 *
 * ```java
 * record Stats(String host, long step, double loss) {}
 *
 * ObjectCodec<Stats> codec = new ObjectCodec<>() {
 *     public byte[] encode(Stats s) { return mapper.writeValueAsBytes(s); }
 *     public Stats decode(byte[] b) { return mapper.readValue(b, Stats.class); }
 * };
 * List<Stats> all = comm.allGatherObjectBlocking(myStats, codec);
 * ```
 *
 * **Contract.** `decode(encode(v))` must give back an equal value, and both must be deterministic:
 * every rank decodes the same bytes, so every rank gets the same result (or the same failure).
 *
 * **Failure.** Either method may throw any exception. The collective then still completes on every
 * rank (it never hangs waiting for the failed rank) and every rank throws [ObjectCodecException]
 * naming the rank whose value failed and the codec's message; the communicator stays usable.
 *
 * **Thread-safety.** A codec may be called from several tpcomm worker threads at once (one per
 * collective in flight); make it stateless or thread-safe.
 */
public interface ObjectCodec<T> {
    /** The bytes of [value]; must not return null. */
    public fun encode(value: T): ByteArray

    /** The value that [encode] turned into [bytes]. */
    public fun decode(bytes: ByteArray): T
}
