package dev.tpcomm.store

import java.security.MessageDigest
import java.security.SecureRandom
import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

/**
 * The opt-in shared secret of a store whose clients are all tpcomm processes (PyTorch's protocol
 * has none, so PyTorch's clients and servers cannot take part). A tpcomm extension of the
 * protocol, after VALIDATE: the client sends [AUTH] with an empty value; the server answers a
 * fresh 32-byte nonce (a value: u64 length, bytes); the client sends [AUTH] with
 * HMAC-SHA256(secret, [CONTEXT] + nonce); the server answers u8 0 when it matches (compared in
 * constant time) and otherwise closes the connection. Until then a server with a secret serves
 * nothing: any other request closes the connection. The secret never crosses the wire, and a
 * recorded answer is useless for another connection (a new nonce each time). It authenticates
 * clients only; it does not encrypt (run the job on a private network, as PyTorch's store assumes).
 *
 * Stateless and thread-safe.
 */
internal object StoreSecret {
    /** The request code of the exchange: outside PyTorch's codes (0..18), so PyTorch's server closes the connection on it. */
    const val AUTH: Int = 116

    /** Bytes of the server's nonce and of the client's answer. */
    const val BYTES: Int = 32

    /** What the HMAC covers before the nonce, so the answer means nothing to another protocol. */
    private val CONTEXT = "tpcomm-store-auth-v1".toByteArray()

    private val random = SecureRandom()

    fun nonce(): ByteArray = ByteArray(BYTES).also { random.nextBytes(it) }

    fun answer(secret: ByteArray, nonce: ByteArray): ByteArray {
        val mac = Mac.getInstance("HmacSHA256")
        mac.init(SecretKeySpec(secret, "HmacSHA256"))
        mac.update(CONTEXT)
        return mac.doFinal(nonce)
    }

    fun matches(secret: ByteArray, nonce: ByteArray, answer: ByteArray): Boolean = MessageDigest.isEqual(answer(secret, nonce), answer)

    /** Refuses an empty secret (it would protect nothing), naming what to set. */
    fun checked(secret: ByteArray?, where: String): ByteArray? {
        require(secret == null || secret.isNotEmpty()) { "$where: the store secret is empty; give at least one byte (16 random bytes or more are advised), or null for none" }
        return secret?.copyOf()
    }
}
