"""The questions the framework-native adapter tests share: calibrate on the first, check the
rest, and one question answered and one abstained (a query each)."""

from tests.texts import IN_KNOWLEDGE, MORE_IN_KNOWLEDGE, OUT_OF_KNOWLEDGE

CALIBRATION = IN_KNOWLEDGE + MORE_IN_KNOWLEDGE[:10]
CHECKED = MORE_IN_KNOWLEDGE[10:] + OUT_OF_KNOWLEDGE
ANSWERED = MORE_IN_KNOWLEDGE[12]  # in knowledge
ABSTAINED = OUT_OF_KNOWLEDGE[0]  # out of knowledge
