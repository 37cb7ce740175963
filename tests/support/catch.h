// catch.h: the one place that knows whether this build uses Catch2 v2 (Debian 12) or v3 (Ubuntu
// 24.04). Test files include this and nothing else from Catch.
#pragma once
#if SG_CATCH2_V3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
