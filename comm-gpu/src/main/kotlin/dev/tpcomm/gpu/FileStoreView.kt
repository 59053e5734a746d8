package dev.tpcomm.gpu

import dev.tpcomm.store.Store
import dev.tpcomm.store.StoreTimeoutException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import java.util.concurrent.TimeoutException
import kotlin.time.Duration
import kotlin.time.TimeSource

/**
 * [FileStore.asStore]: a [FileStore] behind the [Store] API. Every call runs on [Dispatchers.IO]
 * (the file lock blocks); waits poll through [FileStore.await], which is cancellable. A wait that
 * passes its timeout throws [StoreTimeoutException] naming the keys and the file.
 */
internal class FileStoreView(private val file: FileStore, override val timeout: Duration) : Store {
    private suspend fun <T> io(block: () -> T): T = withContext(Dispatchers.IO) { block() }

    override suspend fun set(key: String, value: ByteArray) = io { file.set(key, value) }

    override suspend fun get(key: String, timeout: Duration): ByteArray = awaitOne(key, timeout, "get")

    override suspend fun add(key: String, delta: Long): Long = io { file.add(key, delta) }

    override suspend fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray =
        io { file.compareSet(key, expected, desired) }

    override suspend fun check(keys: List<String>): Boolean = io { file.keys().containsAll(keys) }

    override suspend fun wait(keys: List<String>, timeout: Duration) {
        val mark = TimeSource.Monotonic.markNow()
        for (k in keys) awaitOne(k, (timeout - mark.elapsedNow()).coerceAtLeast(Duration.ZERO), "wait")
    }

    override suspend fun delete(key: String): Boolean = io { file.delete(key) }

    override suspend fun numKeys(): Long = io { file.keys().size.toLong() }

    override suspend fun multiGet(keys: List<String>, timeout: Duration): List<ByteArray> {
        wait(keys, timeout)
        return io { keys.map { file.get(it) ?: ByteArray(0) } }
    }

    override suspend fun multiSet(values: Map<String, ByteArray>) = io { values.forEach { (k, v) -> file.set(k, v) } }

    override suspend fun append(key: String, value: ByteArray) = io { file.append(key, value) }

    override fun close() {}

    override fun toString(): String = "FileStore(${file.path})"

    private suspend fun awaitOne(key: String, timeout: Duration, op: String): ByteArray = try {
        file.await(key, timeout)
    } catch (e: TimeoutException) {
        throw StoreTimeoutException(e.message ?: "no value for '$key' in ${file.path} after $timeout", op, e)
    }
}
