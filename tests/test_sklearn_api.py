"""scikit-learn's own API checks that need no data, plus tags.

scikit-learn's data checks feed numeric arrays, which a text estimator cannot take; their text
versions are hand-written in test_sentence.py (fit returns self, NotFittedError, clone, pickle,
Pipeline, GridSearchCV).
"""

import pytest
from sklearn.utils import estimator_checks as checks

from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor

ESTIMATORS = [BertSentenceTransformer(), BertTextClassifier(), BertTextRegressor()]

API_CHECKS = [
    checks.check_no_attributes_set_in_init,
    checks.check_get_params_invariance,
    checks.check_set_params,
    checks.check_parameters_default_constructible,
    checks.check_estimator_cloneable,
    checks.check_estimator_repr,
    checks.check_valid_tag_types,
    checks.check_estimator_tags_renamed,
    checks.check_mixin_order,
    checks.check_do_not_raise_errors_in_init_or_set_params,
    checks.check_estimators_unfitted,
]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("check", API_CHECKS, ids=lambda c: c.__name__)
def test_sklearn_api_check(estimator, check):
    check(type(estimator).__name__, estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_tags_declare_text_input(estimator):
    tags = estimator.__sklearn_tags__()
    assert tags.input_tags.string
    assert tags.requires_fit


def test_html_repr_for_notebooks():
    html = BertSentenceTransformer(pooling="cls")._repr_html_()
    assert "BertSentenceTransformer" in html and "cls" in html


def test_regressor_tags():
    tags = BertTextRegressor().__sklearn_tags__()
    assert tags.estimator_type == "regressor"
    assert tags.target_tags.multi_output and tags.target_tags.single_output
