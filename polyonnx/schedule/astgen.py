"""isl's AST generator: schedule tree -> isl AST (the loops that will run)."""

from __future__ import annotations

import islpy as isl


def build_ast(schedule: isl.Schedule) -> isl.AstNode:
    """Generate the loop AST of ``schedule`` with isl's AST generator.

    Example:
        >>> s = isl.Schedule.from_domain(isl.UnionSet("{ S0[i] : 0 <= i < 4 }"))
        >>> s = s.insert_partial_schedule(isl.MultiUnionPwAff("[{ S0[i] -> [(i)] }]"))
        >>> print(build_ast(s).to_C_str().strip())
        for (int c0 = 0; c0 <= 3; c0 += 1)
          S0(c0);
    """
    build = isl.AstBuild.from_context(isl.Set.read_from_str(schedule.get_ctx(), "{ : }"))
    return build.node_from_schedule(schedule)
