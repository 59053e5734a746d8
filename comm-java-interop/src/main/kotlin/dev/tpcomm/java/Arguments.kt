package dev.tpcomm.java

/**
 * [value], or an [IllegalArgumentException] `"<operation>: <parameter> is null; pass <what>"`.
 * The facade's methods take Java's nullable references and check them here, inside the operation,
 * so that a future-returning method completes its future exceptionally instead of throwing at call
 * time (and a blocking one throws [IllegalArgumentException], as for any other bad argument).
 */
internal fun <T : Any> required(value: T?, operation: String, parameter: String, what: String): T =
    value ?: throw IllegalArgumentException("$operation: $parameter is null; pass $what")
