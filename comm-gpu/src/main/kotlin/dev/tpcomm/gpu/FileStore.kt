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
 * The file holds one line per write (`key<TAB>base64(value)`); the last write of a key wins.
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
            runCatching { Base64.getDecoder().decode(line.substring(tab + 1)) }.getOrNull()?.let { out[line.substring(0, tab)] = it }
        }
        return out
    }

    private fun append(ch: FileChannel, key: String, value: ByteArray) {
        val line = "$key\t${Base64.getEncoder().encodeToString(value)}\n".toByteArray(Charsets.UTF_8)
        val buf = ByteBuffer.wrap(line)
        var pos = ch.size()
        while (buf.hasRemaining()) pos += ch.write(buf, pos)
        ch.force(false)
    }

    override fun toString(): String = "FileStore($path)"

    private companion object {
        val LOCAL_LOCK = Any()
    }
}
