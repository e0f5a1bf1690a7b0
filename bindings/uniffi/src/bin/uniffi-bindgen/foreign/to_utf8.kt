    fun toUtf8(value: String): ByteBuffer {
        // A lone surrogate is not text: refused as the library refuses bad input, with the
        // typed error (the idemdb bindings' change; UniFFI throws MalformedInputException).
        try {
            return Charsets.UTF_8.newEncoder().run {
                onMalformedInput(CodingErrorAction.REPORT)
                encode(CharBuffer.wrap(value))
            }
        } catch (malformed: java.nio.charset.CharacterCodingException) {
            val at = value.indices.firstOrNull { i ->
                val c = value[i]
                (c.isHighSurrogate() && (i + 1 >= value.length || !value[i + 1].isLowSurrogate())) ||
                    (c.isLowSurrogate() && (i == 0 || !value[i - 1].isHighSurrogate()))
            }
            throw IdemdbException.InvalidArgument(
                "@INVALID_ARGUMENT@",
                "a string holds a lone UTF-16 surrogate (at index $at): it is not Unicode text",
                false,
            )
        }
    }
