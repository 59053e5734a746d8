package dev.tpcomm.store

import org.bytedeco.javacpp.SizeTPointer
import org.bytedeco.javacpp.chrono.Milliseconds
import org.bytedeco.pytorch.ByteVector
import org.bytedeco.pytorch.StringVector
import org.bytedeco.pytorch.TCPStore
import org.bytedeco.pytorch.TCPStoreOptions

/**
 * PyTorch's own `c10d::TCPStore` (libtorch 2.10 through the JavaCPP preset
 * `org.bytedeco:pytorch:2.10.0-1.5.13`, test scope): a server (`isServer`, PyTorch's libuv
 * daemon in this process) or a client, called as PyTorch's Python `TCPStore` calls it. Calls block.
 */
internal class PyTorchStore private constructor(val store: TCPStore) : AutoCloseable {
    val port: Int get() = store.port.toInt() and 0xffff
    val isLibUv: Boolean get() = store.isLibUvBackend

    fun set(key: String, value: ByteArray) = store.set(key, ByteVector(*value))
    fun get(key: String): ByteArray = store.get(key).get()
    fun add(key: String, delta: Long): Long = store.add(key, delta)
    fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray =
        store.compareSet(key, ByteVector(*expected), ByteVector(*desired)).get()
    fun check(keys: List<String>): Boolean = store.check(StringVector(*keys.toTypedArray()))
    fun wait(keys: List<String>, millis: Long) = store._wait(StringVector(*keys.toTypedArray()), Milliseconds(millis))
    fun delete(key: String): Boolean = store.deleteKey(key)
    fun numKeys(): Long = store.numKeys
    fun append(key: String, value: ByteArray) = store.append(key, ByteVector(*value))
    fun queuePush(key: String, value: ByteArray) = store.queuePush(key, ByteVector(*value))
    fun queuePop(key: String): ByteArray = store.queuePop(key, true).get()
    fun queueLen(key: String): Long = store.queueLen(key)
    fun listKeys(): List<String> = store.listKeys().get().map { it.string }
    fun waitForWorkers() = store.waitForWorkers()

    override fun close() = store.close()

    companion object {
        /** PyTorch's server on [port] (0: any) of every interface, with its own client. */
        fun server(port: Int = 0, workers: Int? = null, waitWorkers: Boolean = false, timeoutMillis: Long = 30_000): PyTorchStore =
            PyTorchStore(TCPStore("127.0.0.1", options(port, true, workers, waitWorkers, timeoutMillis)))

        /** PyTorch's client of the server at 127.0.0.1:[port]. */
        fun client(port: Int, workers: Int? = null, waitWorkers: Boolean = false, timeoutMillis: Long = 30_000): PyTorchStore =
            PyTorchStore(TCPStore("127.0.0.1", options(port, false, workers, waitWorkers, timeoutMillis)))

        private fun options(port: Int, server: Boolean, workers: Int?, waitWorkers: Boolean, timeoutMillis: Long) =
            TCPStoreOptions().port(port.toShort()).isServer(server).waitWorkers(waitWorkers)
                .timeout(Milliseconds(timeoutMillis))
                .also { o -> if (workers != null) o.numWorkers(SizeTPointer(1).put(workers.toLong())) }
    }
}
