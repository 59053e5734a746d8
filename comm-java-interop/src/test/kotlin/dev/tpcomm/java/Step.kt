package dev.tpcomm.java

import kotlinx.serialization.Serializable

/** A Kotlin `@Serializable` class that the Java tests move with the `Class`-based object collectives. */
@Serializable
data class Step(val rank: Int, val loss: Double, val tags: List<String> = emptyList())
