package dev.tpcomm.java

import kotlinx.serialization.KSerializer
import kotlinx.serialization.SerializationException
import kotlinx.serialization.json.Json
import kotlinx.serialization.serializer

/**
 * An [ObjectCodec] over a kotlinx.serialization [serializer], writing UTF-8 JSON with the settings
 * of comm-api's `Communicator.allGatherObject` (`Json { encodeDefaults = true }`).
 */
internal class SerializerCodec<T>(private val serializer: KSerializer<T>) : ObjectCodec<T> {
    override fun encode(value: T): ByteArray = json.encodeToString(serializer, value).encodeToByteArray()

    override fun decode(bytes: ByteArray): T = json.decodeFromString(serializer, bytes.decodeToString())

    override fun toString(): String = "kotlinx.serialization JSON codec of ${serializer.descriptor.serialName}"

    companion object {
        private val json = Json { encodeDefaults = true }

        /** Serializer lookups are reflective: one per class, kept as long as the class lives. */
        private val byClass = object : ClassValue<Result<SerializerCodec<*>>>() {
            override fun computeValue(type: Class<*>): Result<SerializerCodec<*>> = runCatching { SerializerCodec(serializer(type)) }
        }

        /**
         * The codec of [type], found with kotlinx.serialization's `serializer(java.lang.reflect.Type)`.
         * @throws IllegalArgumentException when [type] has no serializer (a plain Java class) or is
         * generic (`Map.class`, `List.class`: its type arguments are unknown).
         */
        fun <T> forClass(type: Class<T>): SerializerCodec<T> {
            // A generic class (Map, List, a generic @Serializable class) says nothing of its type
            // arguments: kotlinx would find a serializer whose elements are of unknown type and fail
            // only while encoding, after the ranks started the exchange. Refuse it here, before anything is sent.
            require(type.typeParameters.isEmpty()) {
                "${type.name} is generic (${type.typeParameters.joinToString(", ", "<", ">") { it.name }}), and a Class cannot say what " +
                    "its type arguments are; pass an ObjectCodec (any encoding you already use, e.g. your JSON library) or, " +
                    "from Kotlin, a KSerializer such as MapSerializer(String.serializer(), Int.serializer())"
            }
            val found = byClass.get(type)
            @Suppress("UNCHECKED_CAST")
            return found.getOrElse { e ->
                if (e !is SerializationException && e !is IllegalArgumentException) throw e
                throw IllegalArgumentException(
                    "${type.name} has no kotlinx.serialization serializer (${e.message}). Annotate the class with " +
                        "@Serializable (a Kotlin class compiled with the serialization plugin), or pass an ObjectCodec " +
                        "that encodes it with the serializer you already use (works for any Java record or POJO).",
                    e,
                )
            } as SerializerCodec<T>
        }
    }
}
