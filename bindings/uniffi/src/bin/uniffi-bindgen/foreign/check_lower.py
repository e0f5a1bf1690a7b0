    @staticmethod
    def check_lower(value):
        if not isinstance(value, str):
            raise TypeError("argument must be str, not {}".format(type(value).__name__))
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                # A lone surrogate is not text: refused as the library refuses bad input, with
                # the typed error (the idemdb bindings' change; UniFFI raises UnicodeEncodeError).
                raise IdemdbError.InvalidArgument(
                    "@INVALID_ARGUMENT@",
                    f"a string holds a lone UTF-16 surrogate (at index {error.start}): it is not Unicode text",
                    False,
                ) from None
        return value
