package dev.tpcomm

import kotlinx.serialization.serializer

/** [Communicator.allGatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.allGatherObject(value: T): List<T> =
    allGatherObject(value, serializer<T>())

/** [Communicator.broadcastObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.broadcastObject(value: T?, root: Int): T =
    broadcastObject(value, root, serializer<T>())

/** [Communicator.gatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.gatherObject(value: T, root: Int): List<T>? =
    gatherObject(value, root, serializer<T>())

/** [Communicator.scatterObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.scatterObject(values: List<T>?, root: Int): T =
    scatterObject(values, root, serializer<T>())

/** [Communicator.sendObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.sendObject(value: T, dst: Int, tag: Int = 0): Unit =
    sendObject(value, dst, tag, serializer<T>())

/** [Communicator.recvObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.recvObject(src: Int, tag: Int = 0): T =
    recvObject(src, tag, serializer<T>())
