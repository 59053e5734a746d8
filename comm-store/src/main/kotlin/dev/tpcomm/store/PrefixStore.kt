package dev.tpcomm.store

import kotlin.time.Duration

/**
 * [Store.withPrefix]: keys become `"$prefix/$key"`, as PyTorch's `PrefixStore::joinKey`
 * (`torch/csrc/distributed/c10d/PrefixStore.cpp`) forms them. [numKeys] counts the whole store, as
 * PyTorch's `PrefixStore::getNumKeys` (it forwards to the underlying store).
 */
internal class PrefixStore(private val inner: Store, private val prefix: String) : Store {
    override val timeout: Duration get() = inner.timeout

    private fun k(key: String) = "$prefix/$key"

    override suspend fun set(key: String, value: ByteArray) = inner.set(k(key), value)
    override suspend fun get(key: String, timeout: Duration): ByteArray = inner.get(k(key), timeout)
    override suspend fun add(key: String, delta: Long): Long = inner.add(k(key), delta)
    override suspend fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray =
        inner.compareSet(k(key), expected, desired)
    override suspend fun check(keys: List<String>): Boolean = inner.check(keys.map(::k))
    override suspend fun wait(keys: List<String>, timeout: Duration) = inner.wait(keys.map(::k), timeout)
    override suspend fun delete(key: String): Boolean = inner.delete(k(key))
    override suspend fun numKeys(): Long = inner.numKeys()
    override suspend fun multiGet(keys: List<String>, timeout: Duration): List<ByteArray> = inner.multiGet(keys.map(::k), timeout)
    override suspend fun multiSet(values: Map<String, ByteArray>) = inner.multiSet(values.mapKeys { k(it.key) })
    override suspend fun append(key: String, value: ByteArray) = inner.append(k(key), value)
    override fun withPrefix(prefix: String): Store = PrefixStore(inner, k(prefix))
    override fun close() {}
    override fun toString(): String = "PrefixStore('$prefix', $inner)"
}
