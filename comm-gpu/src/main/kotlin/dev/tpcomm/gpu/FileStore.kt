package dev.tpcomm.gpu

import kotlinx.coroutines.delay
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.Files
import java.nio.file.Path
import java.nio.file.StandardOpenOption
import java.util.Base64
import java.util.concurrent.TimeoutException
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.TimeSource

/**
 * A key-value store in one file on a path every rank can see (a shared file system, or `/tmp` for
 * ranks on one host), as `torch.distributed`'s `file://` store: ranks write keys and wait for
 * others' keys. Used to hand NCCL's unique id from rank 0 to the other ranks.
 *
 * The file holds one line per write (`key<TAB>base64(value)`, or `key<TAB>!` for a deletion); the
 * last write of a key wins.
 * Every access holds an OS file lock (`FileChannel.lock`), so processes and threads may share
 * the file. Start each job with a path that does not exist yet (or an empty file): values left by
 * an earlier job would be read as this job's.
 *
 * Thread-safe. [await] suspends (polling every few milliseconds) and is cancellable.
 */
public class FileStore(
    /** The store's file; created with its parent folders on first write. */
    public val path: Path,
) {
    /** Writes [value] under [key] (keys must not contain tabs or newlines). */
    public fun set(key: String, value: ByteArray) {
        checkKey(key)
        locked(write = true) { ch -> append(ch, key, value) }
    }

    /** The last value written under [key], or null. */
    public fun get(key: String): ByteArray? {
        checkKey(key)
        if (!Files.exists(path)) return null
        return locked(write = false) { ch -> read(ch)[key] }
    }

    /** Atomically adds [delta] to the counter [key] (missing counts as 0) and returns the new value. */
    public fun add(key: String, delta: Long): Long {
        checkKey(key)
        return locked(write = true) { ch ->
            val now = (read(ch)[key]?.decodeToString()?.toLong() ?: 0L) + delta
            append(ch, key, now.toString().encodeToByteArray())
            now
        }
    }

    /**
     * Atomically replaces the value of [key] by [desired] if it equals [expected] and returns the
     * value now stored; a missing key with an empty [expected] stores [desired], with another
     * [expected] stores nothing and returns [expected] (PyTorch's TCPStore server answers the same).
     */
    public fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray {
        checkKey(key)
        return locked(write = true) { ch ->
            val now = read(ch)[key]
            when {
                now == null && expected.isEmpty() -> desired.also { append(ch, key, it) }
                now == null -> expected
                now.contentEquals(expected) -> desired.also { append(ch, key, it) }
                else -> now
            }
        }
    }

    /** Appends [value] to the value of [key] (a missing key is created with [value]). */
    public fun append(key: String, value: ByteArray) {
        checkKey(key)
        locked(write = true) { ch -> append(ch, key, (read(ch)[key] ?: ByteArray(0)) + value) }
    }

    /** Deletes [key] (a tombstone line); true if it had a value. */
    public fun delete(key: String): Boolean {
        checkKey(key)
        if (!Files.exists(path)) return false
        return locked(write = true) { ch ->
            val had = read(ch).containsKey(key)
            if (had) write(ch, "$key\t$TOMBSTONE\n")
            had
        }
    }

    /** The keys that have a value now. */
    public fun keys(): Set<String> = if (!Files.exists(path)) emptySet() else locked(write = false) { ch -> read(ch).keys }

    /**
     * This file behind the [dev.tpcomm.store.Store] API, with [timeout] as the default deadline of
     * its waits: the same calls as a TCP store, for jobs whose ranks share a file system. Waits
     * poll the file (1 ms doubling to 20 ms); `multiSet` writes key by key; `close` does nothing.
     */
    public fun asStore(timeout: Duration): dev.tpcomm.store.Store = FileStoreView(this, timeout)

    /**
     * Suspends until [key] has a value and returns it.
     *
     * @throws TimeoutException after [timeout], naming the key and the file.
     */
    public suspend fun await(key: String, timeout: Duration): ByteArray {
        val mark = TimeSource.Monotonic.markNow()
        var pause = 1.milliseconds
        while (true) {
            get(key)?.let { return it }
            if (mark.elapsedNow() > timeout) {
                throw TimeoutException(
                    "no value for '$key' in the rendezvous file $path after $timeout; check that rank 0 started and uses the same path",
                )
            }
            delay(pause)
            pause = (pause * 2).coerceAtMost(20.milliseconds)
        }
    }

    private fun checkKey(key: String) {
        require(key.isNotEmpty() && '\t' !in key && '\n' !in key) { "store key must be non-empty without tabs or newlines: '$key'" }
    }

    private fun <T> locked(write: Boolean, body: (FileChannel) -> T): T {
        if (write) path.toAbsolutePath().parent?.let { Files.createDirectories(it) }
        val options = if (write) {
            arrayOf(StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE)
        } else {
            arrayOf(StandardOpenOption.READ)
        }
        synchronized(LOCAL_LOCK) { // FileChannel locks are per process: serialise this process's threads
            FileChannel.open(path, *options).use { ch ->
                ch.lock(0, Long.MAX_VALUE, !write).use { return body(ch) }
            }
        }
    }

    private fun read(ch: FileChannel): Map<String, ByteArray> {
        val size = ch.size()
        val buf = ByteBuffer.allocate(size.toInt())
        var pos = 0L
        while (pos < size) {
            val n = ch.read(buf, pos)
            if (n < 0) break
            pos += n
        }
        val out = HashMap<String, ByteArray>()
        for (line in String(buf.array(), 0, buf.position(), Charsets.UTF_8).split('\n')) {
            val tab = line.indexOf('\t')
            if (tab <= 0) continue // an empty or partially written line
            val text = line.substring(tab + 1)
            if (text == TOMBSTONE) {
                out.remove(line.substring(0, tab))
                continue
            }
            runCatching { Base64.getDecoder().decode(text) }.getOrNull()?.let { out[line.substring(0, tab)] = it }
        }
        return out
    }

    private fun append(ch: FileChannel, key: String, value: ByteArray) = write(ch, "$key\t${Base64.getEncoder().encodeToString(value)}\n")

    private fun write(ch: FileChannel, text: String) {
        val buf = ByteBuffer.wrap(text.toByteArray(Charsets.UTF_8))
        var pos = ch.size()
        while (buf.hasRemaining()) pos += ch.write(buf, pos)
        ch.force(false)
    }

    override fun toString(): String = "FileStore($path)"

    private companion object {
        val LOCAL_LOCK = Any()

        /** The value part of a deleted key's line: `!` is not a Base64 character. */
        const val TOMBSTONE = "!"
    }
}
