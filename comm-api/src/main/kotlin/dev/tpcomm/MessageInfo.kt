package dev.tpcomm

/**
 * What [Communicator.recv] or [Communicator.probe] learned about a point-to-point message.
 *
 * @property source rank of the sender within the communicator (never [Communicator.ANY_SOURCE]).
 * @property tag tag the sender used (never [Communicator.ANY_TAG]).
 * @property byteSize size of the message's payload in bytes.
 */
public data class MessageInfo(
    public val source: Int,
    public val tag: Int,
    public val byteSize: Long,
)
