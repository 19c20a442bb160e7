# fast_path.awk - assembles the decision script's fast path: service/redis/fast.lua with the
# steps of the rule types that have one (service/core/rules/*.fast.lua) spliced in, so that a
# type's arithmetic lives in its own files and the path names no type.
#   awk -f tools/fast_path.awk service/core/rules/*.fast.lua service/redis/fast.lua
# A type's file: "--@fast TAG", then sections "--@prelude", "--@check", "--@after" (the rest of
# a directive line is a comment). In fast.lua: the lines "-- @FAST_PRELUDE@", "-- @FAST_CHECK@"
# and "-- @FAST_AFTER@" take the sections (check and after as a dispatch on the item's tag, the
# tag's number kept in v[b + 1]); FAST_TAGS in a line becomes "tag is one of them".
FILENAME ~ /\.fast\.lua$/ {
    if ($1 == "--@fast") { tag = $2; tags[++n] = tag; sec = ""; next }
    if ($1 ~ /^--@(prelude|check|after)$/) { sec = substr($1, 4); next }
    if (sec != "") code[tag, sec] = code[tag, sec] $0 "\n"
    next
}
/^-- @FAST_PRELUDE@$/ { for (i = 1; i <= n; i++) printf "%s", code[tags[i], "prelude"]; next }
/^-- @FAST_CHECK@$/ {
    for (i = 1; i <= n; i++) {
        printf "%s tag == '%s' then\nv[b + 1] = %d\n%s", i == 1 ? "if" : "elseif", tags[i], i,
            code[tags[i], "check"]
    }
    print "end"
    next
}
/^-- @FAST_AFTER@$/ {
    for (i = 1; i <= n; i++)
        printf "%s v[b + 1] == %d then\n%s", i == 1 ? "if" : "elseif", i, code[tags[i], "after"]
    print "end"
    next
}
/FAST_TAGS/ {
    t = ""
    for (i = 1; i <= n; i++) t = t (i > 1 ? " or " : "") "tag == '" tags[i] "'"
    gsub(/FAST_TAGS/, t)
}
{ print }
